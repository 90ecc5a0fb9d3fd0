package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds of one recipient's preferences: each list names at most
// MaxPreferenceScenes scenes, each a valid scene name (CheckName, at most
// MaxSceneBytes). They keep a row, and the cache of them, small.
const MaxPreferenceScenes = 64

// MuteAll, in MutedScenes, mutes every scene.
const MuteAll = "*"

// ReasonPreference is the Reason of a message the recipient's preferences
// held back: muted (suppressed) or collected for a digest (digest_only).
const ReasonPreference = "preference"

// ScopePreference is the Scope of an audit row (and a check answer) of a
// message its recipient's preferences held back rather than a limit.
const ScopePreference Scope = "preference"

// DefaultPreferenceDigestDelay is how long a digest_only message waits for
// others to join its digest when its scene has no rolling limit whose
// window could say.
const DefaultPreferenceDigestDelay = time.Hour

// Preferences are what one recipient asked of the gate. A muted scene's
// messages are suppressed; a digest_only scene's messages are collected
// into the scene's digest queue and forwarded as one digest. A bypass
// priority of the scene passes both. Scene names need not have a rule now
// (rules change), but must be valid scene names.
type Preferences struct {
	// Recipient is the key the preferences belong to:
	// receive_id_type:receive_id, as Message.Recipient.
	Recipient string `json:"recipient"`
	// MutedScenes are muted for the recipient; MuteAll mutes every scene.
	MutedScenes []string `json:"muted_scenes"`
	// MutedUntil, when set, ends the mute then; zero mutes until changed.
	MutedUntil time.Time `json:"muted_until,omitzero"`
	// DigestScenes (digest_only) are the scenes whose messages to the
	// recipient always go to the scene's digest instead of out on their own.
	DigestScenes []string `json:"digest_only"`
	// UpdatedAt is when the store last wrote them, on its clock.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Mutes reports whether the preferences mute scene at now. A nil p mutes
// nothing.
func (p *Preferences) Mutes(scene string, now time.Time) bool {
	if p == nil || len(p.MutedScenes) == 0 {
		return false
	}
	if !p.MutedUntil.IsZero() && !now.Before(p.MutedUntil) {
		return false
	}
	return slices.Contains(p.MutedScenes, MuteAll) || slices.Contains(p.MutedScenes, scene)
}

// DigestOnly reports whether the preferences collect scene's messages into
// its digest. A nil p collects nothing.
func (p *Preferences) DigestOnly(scene string) bool {
	return p != nil && slices.Contains(p.DigestScenes, scene)
}

// Check validates the preferences as a PUT gives them, and makes their
// lists canonical (sorted, without repeats, never nil). Every error wraps
// ErrBadRequest.
func (p *Preferences) Check() error {
	if err := CheckRecipient(p.Recipient); err != nil {
		return err
	}
	for _, l := range []struct {
		field  string
		scenes *[]string
		all    bool
	}{{"muted_scenes", &p.MutedScenes, true}, {"digest_only", &p.DigestScenes, false}} {
		if len(*l.scenes) > MaxPreferenceScenes {
			return fmt.Errorf("%w: %s names %d scenes, over the limit of %d", ErrBadRequest, l.field, len(*l.scenes), MaxPreferenceScenes)
		}
		for i, s := range *l.scenes {
			if s == MuteAll {
				if l.all {
					continue
				}
				// Were it a scene's name, a reader would take it for all.
				return fmt.Errorf("%w: %s[%d]: %q mutes every scene in muted_scenes, and means nothing in %s", ErrBadRequest, l.field, i, MuteAll, l.field)
			}
			if err := CheckName(fmt.Sprintf("%s[%d]", l.field, i), s, MaxSceneBytes); err != nil {
				return fmt.Errorf("%w: %s", ErrBadRequest, InvalidReason(err))
			}
		}
		s := slices.Clone(*l.scenes)
		slices.Sort(s)
		*l.scenes = append([]string{}, slices.Compact(s)...)
	}
	if y := p.MutedUntil.UTC().Year(); !p.MutedUntil.IsZero() && (y < 1 || y > 9999) {
		return fmt.Errorf("%w: muted_until must fall in the years 1 to 9999 (UTC)", ErrBadRequest)
	}
	if !p.MutedUntil.IsZero() {
		p.MutedUntil = p.MutedUntil.UTC()
	}
	return nil
}

// CheckRecipient checks a recipient key, receive_id_type:receive_id, with
// the checks a message's fields get (the known id types, CheckName on the
// receive_id), and refuses one that is not as the gate keeps it
// (RecipientID: an email address trimmed and in lower case): preferences
// under "email:Alice@Example.com" would never meet a message, since every
// message to that address is keyed "email:alice@example.com". Its error
// wraps ErrBadRequest.
func CheckRecipient(key string) error {
	typ, id, ok := strings.Cut(key, ":")
	if !ok {
		return fmt.Errorf("%w: recipient %q is not receive_id_type:receive_id", ErrBadRequest, clip(key))
	}
	if err := checkReceiveIDType("recipient: ", typ); err != nil {
		return fmt.Errorf("%w: %s", ErrBadRequest, InvalidReason(err))
	}
	if err := CheckName("receive_id of the recipient", id, MaxReceiveIDBytes); err != nil {
		return fmt.Errorf("%w: %s", ErrBadRequest, InvalidReason(err))
	}
	if kept := RecipientID(typ, id); kept != id {
		return fmt.Errorf("%w: recipient %q: an email receive_id is matched trimmed and in lower case, and kept so: write %q",
			ErrBadRequest, clip(key), clip(typ+":"+kept))
	}
	return nil
}

// PreferenceChange says the preferences of Recipient were written (or
// deleted) at At, on the store's clock.
type PreferenceChange struct {
	Recipient string
	At        time.Time
}

// PreferenceStore keeps recipients' preferences, shared by every gate.
//
// Preferences returns the preferences of those of recipients that have
// any, in one call: a recipient without is absent from the map.
//
// PutPreferences replaces the recipient's preferences atomically and
// returns them as stored (canonical, UpdatedAt set by the store's clock).
// DeletePreferences removes them; deleting none is no error. Both leave a
// change that PreferenceChanges reports.
//
// PreferenceChanges reports the changes written after since, oldest first,
// at most limit of them, with the store's clock now: a reader polls with
// the latest At it has seen, less a margin for transactions that commit in
// another order than their clock read. A zero since returns no changes,
// only the clock: where a new reader starts.
//
// Errors wrap ErrUnavailable (retry later), ErrBadRequest or ErrPermanent.
type PreferenceStore interface {
	Preferences(ctx context.Context, recipients []string) (map[string]Preferences, error)
	PutPreferences(ctx context.Context, p Preferences) (Preferences, error)
	DeletePreferences(ctx context.Context, recipient string) error
	PreferenceChanges(ctx context.Context, since time.Time, limit int) (changes []PreferenceChange, now time.Time, err error)
}

// digestDelay is how long a digest_only message of the scene waits for
// others to join its digest: the scene's shortest rolling window, so that
// the digest goes out about as often as the scene's limit allows one
// message, or DefaultPreferenceDigestDelay without one.
func (r SceneRule) digestDelay() time.Duration {
	var d time.Duration
	for _, l := range r.Limits {
		if l.Window > 0 && (d == 0 || l.Window < d) {
			d = l.Window
		}
	}
	if d == 0 {
		return DefaultPreferenceDigestDelay
	}
	return d
}
