package gormstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.PreferenceStore = (*Store)(nil)

// preferenceChunk bounds the recipients of one lookup statement: a batch
// of the gate is smaller, but a caller may ask for more.
const preferenceChunk = 500

// Preferences returns the preferences of those of recipients that have
// any (deleted ones are tombstones, absent here), in one statement per
// preferenceChunk recipients. Errors wrap gate.ErrUnavailable.
func (s *Store) Preferences(ctx context.Context, recipients []string) (map[string]gate.Preferences, error) {
	const op = "read recipient preferences"
	out := make(map[string]gate.Preferences)
	for chunk := range slices.Chunk(recipients, preferenceChunk) {
		rows, err := s.db.WithContext(ctx).Raw(`SELECT recipient, muted_scenes, muted_until, digest_only, updated_at
			FROM recipient_preferences WHERE recipient IN ? AND deleted = ?`, chunk, false).Rows()
		if err != nil {
			return nil, unavailable(op, err)
		}
		for rows.Next() {
			var p gate.Preferences
			var muted, digest string
			var until, updated scanTime
			if err := rows.Scan(&p.Recipient, &muted, &until, &digest, &updated); err != nil {
				rows.Close()
				return nil, unavailable(op, err)
			}
			if err := json.Unmarshal([]byte(muted), &p.MutedScenes); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: %s: muted_scenes: %w: %w", op, p.Recipient, gate.ErrPermanent, err)
			}
			if err := json.Unmarshal([]byte(digest), &p.DigestScenes); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: %s: digest_only: %w: %w", op, p.Recipient, gate.ErrPermanent, err)
			}
			p.MutedUntil, p.UpdatedAt = until.t, updated.t
			out[p.Recipient] = p
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, unavailable(op, err)
		}
	}
	return out, nil
}

// PutPreferences replaces p.Recipient's preferences in one statement and
// returns them as stored: checked (gate.Preferences.Check, whose errors
// wrap gate.ErrBadRequest), with UpdatedAt from the database's clock.
func (s *Store) PutPreferences(ctx context.Context, p gate.Preferences) (gate.Preferences, error) {
	const op = "put recipient preferences"
	if err := p.Check(); err != nil {
		return gate.Preferences{}, fmt.Errorf("%s: %w", op, err)
	}
	// Lists of strings: Marshal cannot fail.
	muted, _ := json.Marshal(p.MutedScenes)
	digest, _ := json.Marshal(p.DigestScenes)
	var updated scanTime
	err := s.db.WithContext(ctx).Raw(`INSERT INTO recipient_preferences
			(recipient, muted_scenes, muted_until, digest_only, deleted, updated_at)
		VALUES (?, ?, ?, ?, ?, `+s.dialect.clock+`)
		ON CONFLICT (recipient) DO UPDATE SET muted_scenes = excluded.muted_scenes, muted_until = excluded.muted_until,
			digest_only = excluded.digest_only, deleted = excluded.deleted, updated_at = excluded.updated_at
		RETURNING updated_at`,
		p.Recipient, string(muted), s.dbTimeOrNull(p.MutedUntil), string(digest), false).Row().Scan(&updated)
	if err != nil {
		return gate.Preferences{}, classify(op, err)
	}
	p.MutedUntil = p.MutedUntil.Truncate(time.Microsecond)
	p.UpdatedAt = updated.t
	return p, nil
}

// DeletePreferences removes recipient's preferences, leaving a tombstone
// that PreferenceChanges reports. Deleting preferences that do not exist
// (or were deleted) changes nothing and is no error. A recipient key that
// is not valid wraps gate.ErrBadRequest; other errors gate.ErrUnavailable.
func (s *Store) DeletePreferences(ctx context.Context, recipient string) error {
	const op = "delete recipient preferences"
	if err := gate.CheckRecipient(recipient); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err := s.db.WithContext(ctx).Exec(`UPDATE recipient_preferences
		SET deleted = ?, muted_scenes = '[]', muted_until = NULL, digest_only = '[]', updated_at = `+s.dialect.clock+`
		WHERE recipient = ? AND deleted = ?`, true, recipient, false).Error
	if err != nil {
		return unavailable(op, err)
	}
	return nil
}

// PreferenceChanges reports the recipients whose preferences were written
// or deleted after since, oldest first, at most limit (1000 when limit is
// not positive), and the database's clock, read before them. A zero since
// reports only the clock. Errors wrap gate.ErrUnavailable.
func (s *Store) PreferenceChanges(ctx context.Context, since time.Time, limit int) ([]gate.PreferenceChange, time.Time, error) {
	const op = "read recipient preference changes"
	if limit <= 0 {
		limit = 1000
	}
	db := s.db.WithContext(ctx)
	var now scanTime
	if err := db.Raw(`SELECT ` + s.dialect.clock).Row().Scan(&now); err != nil {
		return nil, time.Time{}, unavailable(op, err)
	}
	if since.IsZero() {
		return nil, now.t, nil
	}
	rows, err := db.Raw(`SELECT recipient, updated_at FROM recipient_preferences
		WHERE updated_at > ? ORDER BY updated_at LIMIT ?`, s.dbTime(since), limit).Rows()
	if err != nil {
		return nil, time.Time{}, unavailable(op, err)
	}
	defer rows.Close()
	var out []gate.PreferenceChange
	for rows.Next() {
		var c gate.PreferenceChange
		var at scanTime
		if err := rows.Scan(&c.Recipient, &at); err != nil {
			return nil, time.Time{}, unavailable(op, err)
		}
		c.At = at.t
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, unavailable(op, err)
	}
	return out, now.t, nil
}

// PruneTombstones deletes the tombstones of preferences deleted before
// before, in batches of pruneBatch rows so that no statement holds the
// table long, and returns how many it deleted. A tombstone is only kept
// for the other gates' caches to see a delete: once every gate has polled
// past it, it says nothing that a missing row does not. Errors wrap
// gate.ErrUnavailable.
func (s *Store) PruneTombstones(ctx context.Context, before time.Time) (int64, error) {
	return s.pruneTombstones(ctx, before, pruneBatch)
}

func (s *Store) pruneTombstones(ctx context.Context, before time.Time, batch int) (int64, error) {
	cutoff := s.dbTime(before)
	// The outer conditions repeat the inner ones: a recipient whose
	// preferences are put again between the two is no longer a tombstone,
	// and PostgreSQL checks them again on the row it deletes, so a fresh
	// write is never taken with its old tombstone.
	return s.deleteInBatches(ctx, "prune preference tombstones", `DELETE FROM recipient_preferences
	WHERE deleted = ? AND updated_at < ? AND recipient IN
	(SELECT recipient FROM recipient_preferences WHERE deleted = ? AND updated_at < ? LIMIT ?)`,
		batch, nil, true, cutoff, true, cutoff)
}
