package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// The files in GATE_DATA_DIR that hold the embedded NATS server's
// passwords when their variables are unset: a downstream sender on the same
// host reads the sender's to read gate.out, an operator the gate's to look
// at the streams.
const (
	embeddedPasswordFile       = "embedded-nats-password"
	embeddedSenderPasswordFile = "embedded-nats-sender-password"
)

// embeddedUser is one of the embedded NATS server's users with a password:
// its name, the variable that sets the password, that variable's value and
// the file that holds it when unset.
type embeddedUser struct {
	name, variable, value, file string
}

// embeddedUsers are the gate's and the sender's.
func (c *config) embeddedUsers() (gate, sender embeddedUser) {
	return embeddedUser{"gate", "GATE_EMBEDDED_NATS_PASSWORD", c.EmbeddedNATSPassword, embeddedPasswordFile},
		embeddedUser{"sender", "GATE_EMBEDDED_NATS_SENDER_PASSWORD", c.EmbeddedNATSSenderPassword, embeddedSenderPasswordFile}
}

// password is u's password: its variable, else the one in the data
// directory, generated there at the first start (mode 0600) and kept for
// the next. The log names the file, never the password.
func (u embeddedUser) password(dataDir string, log *slog.Logger) (string, error) {
	if u.value != "" {
		return u.value, nil
	}
	path := filepath.Join(dataDir, u.file)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return u.generate(path, log)
	}
	if err != nil {
		return "", fmt.Errorf("embedded nats password of user %s: %w", u.name, err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("embedded nats password of user %s: %s is empty: delete it to have one generated, or set %s", u.name, path, u.variable)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("an embedded nats password file is readable by others than its owner: chmod 600 it", "user", u.name, "path", path, "mode", fi.Mode().Perm().String())
	}
	log.Info("embedded nats: the password of a user is in a file", "user", u.name, "path", path)
	return pw, nil
}

// generate writes a new random password to path, which must not exist.
func (u embeddedUser) generate(path string, log *slog.Logger) (string, error) {
	pw := rand.Text()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("embedded nats password of user %s: %w", u.name, err)
	}
	_, err = f.WriteString(pw + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("embedded nats password of user %s: write %s: %w", u.name, path, err)
	}
	log.Info("embedded nats: generated a password", "user", u.name, "path", path)
	return pw, nil
}
