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

// embeddedPasswordFile is the file in GATE_DATA_DIR that holds the
// embedded NATS server's gate password when GATE_EMBEDDED_NATS_PASSWORD is
// unset: a downstream sender on the same host reads it to read gate.out.
const embeddedPasswordFile = "embedded-nats-password"

// embeddedNATSPassword is the password of the embedded NATS server's user
// gate: GATE_EMBEDDED_NATS_PASSWORD, else the one in the data directory,
// generated there at the first start (mode 0600) and kept for the next. The
// log names the file, never the password.
func embeddedNATSPassword(c *config, log *slog.Logger) (string, error) {
	if c.EmbeddedNATSPassword != "" {
		return c.EmbeddedNATSPassword, nil
	}
	path := filepath.Join(c.DataDir, embeddedPasswordFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newEmbeddedNATSPassword(path, log)
	}
	if err != nil {
		return "", fmt.Errorf("embedded nats password: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("embedded nats password: %s is empty: delete it to have one generated, or set GATE_EMBEDDED_NATS_PASSWORD", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the embedded nats password file is readable by others than its owner: chmod 600 it", "path", path, "mode", fi.Mode().Perm().String())
	}
	log.Info("embedded nats: the password of user gate is in a file", "path", path)
	return pw, nil
}

// newEmbeddedNATSPassword writes a new random password to path, which
// must not exist.
func newEmbeddedNATSPassword(path string, log *slog.Logger) (string, error) {
	pw := rand.Text()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("embedded nats password: %w", err)
	}
	_, err = f.WriteString(pw + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("embedded nats password: write %s: %w", path, err)
	}
	log.Info("embedded nats: generated a password for user gate", "path", path)
	return pw, nil
}
