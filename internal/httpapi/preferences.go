package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// preferencesPath is the resource of one recipient's preferences; the
// recipient is its key, receive_id_type:receive_id, URL-escaped.
const preferencesPath = "/v1/recipients/{recipient}/preferences"

// maxPreferencesBody bounds a PUT's body: two lists of at most
// gate.MaxPreferenceScenes names of at most gate.MaxSceneBytes each, with
// room for JSON escapes.
const maxPreferencesBody = 2*gate.MaxPreferenceScenes*(gate.MaxSceneBytes*6+4) + 1024

// routePreferences adds GET, PUT and DELETE of a recipient's preferences,
// and a 405 for any other method. Reading them takes either token;
// changing them, which mutes or unmutes a recipient, the writing one.
func (s *server) routePreferences(handle func(string, http.Handler)) {
	handle("GET "+preferencesPath, s.auth(reads, s.errors(s.getPreferences)))
	handle("PUT "+preferencesPath, s.auth(writes, jsonBody(s.errors(s.putPreferences))))
	handle("DELETE "+preferencesPath, s.auth(writes, s.errors(s.deletePreferences)))
	handle(preferencesPath, s.auth(reads, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		notAllowed(w, r, "GET, HEAD, PUT, DELETE", "GET, PUT or DELETE")
	})))
}

// recipient is the checked recipient key of the request's path. A gate
// without a preference store answers 404 for every recipient.
func (s *server) recipient(r *http.Request) (string, error) {
	key := r.PathValue("recipient")
	if err := gate.CheckRecipient(key); err != nil {
		return "", err
	}
	if s.o.Preferences == nil {
		return "", fmt.Errorf("%w: this gate keeps no recipient preferences", gate.ErrNotFound)
	}
	return key, nil
}

func (s *server) getPreferences(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	key, err := s.recipient(r)
	if err != nil {
		return err
	}
	found, err := s.o.Preferences.Preferences(r.Context(), []string{key})
	if err != nil {
		return err
	}
	p, ok := found[key]
	if !ok {
		return fmt.Errorf("%w: recipient %s has no preferences", gate.ErrNotFound, key)
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// preferencesBody is the JSON a PUT carries. muted_until is read as text,
// so that its error can say what an RFC 3339 time looks like.
type preferencesBody struct {
	MutedScenes []string `json:"muted_scenes"`
	MutedUntil  *string  `json:"muted_until"`
	DigestOnly  []string `json:"digest_only"`
}

// putPreferences replaces the recipient's preferences with the body's (a
// field left out is empty) and answers them as stored.
func (s *server) putPreferences(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	key, err := s.recipient(r)
	if err != nil {
		return err
	}
	b, err := readPreferences(w, r)
	if err != nil {
		return err
	}
	p := gate.Preferences{Recipient: key, MutedScenes: b.MutedScenes, DigestScenes: b.DigestOnly}
	if b.MutedUntil != nil {
		// RFC 3339 lets T and Z be lower case; Go's layout does not.
		if p.MutedUntil, err = time.Parse(time.RFC3339Nano, strings.ToUpper(*b.MutedUntil)); err != nil {
			return badRequest("muted_until must be an RFC 3339 time such as 2026-11-22T08:00:00Z, got %q", *b.MutedUntil)
		}
	}
	if err := p.Check(); err != nil {
		return err
	}
	stored, err := s.o.Preferences.PutPreferences(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, stored)
	return nil
}

// readPreferences decodes a PUT's body: one JSON object of the known
// fields, each at most once and spelt exactly, in UTF-8, within
// maxPreferencesBody.
func readPreferences(w http.ResponseWriter, r *http.Request) (preferencesBody, error) {
	var b preferencesBody
	data, tooBig, err := readBody(w, r, maxPreferencesBody)
	if tooBig {
		return b, badRequest("body is over the limit of %d bytes", maxPreferencesBody)
	}
	if err != nil {
		return b, err
	}
	// Decode takes null for an empty object: a PUT must say what it puts.
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return b, badRequest("body must be a JSON object with muted_scenes, muted_until and digest_only")
	}
	// encoding/json reads a byte that is not UTF-8 as U+FFFD, matches keys
	// in any case and lets the last of two win: refuse what it cannot
	// tell, as every body from outside is.
	if err := gate.CheckJSONBody(data, maxPreferencesBody, "muted_scenes", "muted_until", "digest_only"); err != nil {
		return b, badRequest("%s", gate.InvalidReason(err))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, badRequest("body must be a JSON object with muted_scenes, muted_until and digest_only: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return b, badRequest("body has data after its JSON object")
	}
	return b, nil
}

// deletePreferences removes the recipient's preferences; deleting none is
// no error (204 either way).
func (s *server) deletePreferences(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	key, err := s.recipient(r)
	if err != nil {
		return err
	}
	if err := s.o.Preferences.DeletePreferences(r.Context(), key); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
