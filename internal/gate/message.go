package gate

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on what a single envelope may carry. They keep memory bounded and
// keys short; a message over them is invalid and goes to the dead letter.
const (
	MaxIDBytes        = 256
	MaxSceneBytes     = 256
	MaxReceiveIDBytes = 512
	// DefaultMaxMessageBytes is the default size limit of one envelope:
	// Feishu text content may be up to 150 KB, plus the envelope around it.
	DefaultMaxMessageBytes = 256 << 10
)

// Priority is the producer's priority hint. Scenes may let some priorities
// bypass their limits.
type Priority string

// Priorities a producer may send. The empty priority means PriorityNormal.
const (
	PriorityLow    Priority = "low"
	PriorityNormal Priority = "normal"
	PriorityHigh   Priority = "high"
	PriorityUrgent Priority = "urgent"
)

// ValidPriority reports whether p is one of the known priorities.
func ValidPriority(p Priority) bool {
	switch p {
	case PriorityLow, PriorityNormal, PriorityHigh, PriorityUrgent:
		return true
	}
	return false
}

// receiveIDTypes are the recipient id types Feishu accepts.
var receiveIDTypes = map[string]bool{
	"open_id": true, "user_id": true, "union_id": true, "email": true, "chat_id": true,
}

// Message is one parsed envelope: the fields the gate keys, stores, labels
// and decides on, each checked, and Raw, the original bytes, which are
// forwarded and stored untouched. Both paths (ParseMessage and the header
// fast path of ParseDelivery) give the same Message for the same envelope:
// msg_type and content, which the gate does not interpret, are not kept.
type Message struct {
	ID            string
	Scene         string
	ReceiveIDType string
	ReceiveID     string
	Priority      Priority
	// TZ is the message's own IANA time zone (the tz field or the Gate-TZ
	// header), "" when it names none; Zone is it loaded. It overrides the
	// scene's zone for calendar limits and quiet hours.
	TZ   string
	Zone *time.Location
	// CancelKey names what the message is about (the cancel_key field or
	// the Gate-Cancel-Key header), "" when none: while it is held, a
	// cancel of that key takes it back (CancelRequest).
	CancelKey string
	// Resolves is a cancel_key (the resolves field or the Gate-Resolves
	// header), "" when none: once this message is decided, the held
	// messages of its recipient with that cancel_key are cancelled.
	Resolves string
	Raw      []byte
}

// Recipient is the key of a message's recipient: receive_id_type:receive_id,
// its receive_id as RecipientID keeps it.
func (m Message) Recipient() string { return m.ReceiveIDType + ":" + m.ReceiveID }

// RecipientID is the receive_id the gate keeps for a recipient of id type
// typ, checked as a message's (CheckName): the one every window, audit row,
// preference and check is keyed by. An email address is trimmed of the
// white space around it and its ASCII letters are lower-cased, since
// Feishu matches email recipients so: "Alice@Example.com " and
// "alice@example.com" are one person, and must share one window. Other
// characters stay as sent, as lower-casing them could change their length.
// Feishu's own ids (open_id, union_id, user_id, chat_id) are matched
// byte-exact and kept as sent.
func RecipientID(typ, id string) string {
	if typ != "email" {
		return id
	}
	id = strings.TrimSpace(id)
	i := strings.IndexFunc(id, isUpperASCII)
	if i < 0 {
		return id
	}
	b := []byte(id)
	for ; i < len(b); i++ {
		if isUpperASCII(rune(b[i])) {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}

func isUpperASCII(r rune) bool { return 'A' <= r && r <= 'Z' }

// envelope is the JSON a producer publishes, as far as the gate reads it:
// each field "" when absent or null. It has no field for content or
// msg_type: the gate never interprets them (any JSON value passes, as for
// every field it does not know), the header fast path could not check them,
// and content would copy up to 150 KB per message.
type envelope struct {
	ID, UUID, Scene, ReceiveIDType, ReceiveID, Priority, TZ string
	CancelKey, Resolves                                     string
}

// ParseMessage decodes an envelope. headerID is the Nats-Msg-Id header, used
// when the body carries no id. maxBytes bounds the body; 0 means
// DefaultMaxMessageBytes. Every error is an *InvalidError: the message can
// never be decided and must be dead-lettered, not retried. On error the
// returned Message carries at most the scene, when it was readable.
//
// Keys match exactly, and a body whose top-level keys are ambiguous (one
// given twice, or a field's name in other letter case: "Receive_Id") is
// invalid, since a reader downstream could take it for another message
// than the one decided (envelope_keys.go). So is a body with a lone
// surrogate escape ("\ud800") in a top-level key or a field the gate
// reads: it is no UTF-8 text, and json would read it as U+FFFD, one id or
// recipient with "\ufffd". Inside content, which the gate forwards as sent
// and never reads, it passes, as a \u0000 escape does.
//
// The tz field, when not empty, must name an IANA time zone (LoadZone):
// Message.TZ is it and Message.Zone it loaded. An unknown zone is invalid,
// not UTC: a quiet span or a calendar day in the wrong zone would be wrong
// for that recipient every day, and nothing would say so.
func ParseMessage(data []byte, headerID string, maxBytes int) (Message, error) {
	return parseMessage(data, headerID, "", maxBytes)
}

// parseMessage is ParseMessage with the Gate-TZ header, which wins over the
// body's tz when set.
func parseMessage(data []byte, headerID, headerTZ string, maxBytes int) (Message, error) {
	if err := checkBody(data, maxBytes, "UTF-8 JSON"); err != nil {
		return Message{}, err
	}
	s := envScan{data: data, fields: envelopeFields}
	switch outcome, reason := s.run(); outcome {
	case scanBadText:
		return Message{}, invalidf("message is not valid UTF-8 JSON: %s", reason)
	case scanAmbiguous:
		return Message{}, invalidf("message is ambiguous: %s", reason)
	case scanSyntax, scanBadField:
		return Message{}, invalidf("message is not a JSON object: %s", reason)
	}
	env := s.envelope(headerTZ == "")
	return env.message(data, headerID, headerTZ)
}

// MaxCancelKeyBytes bounds a cancel_key (and resolves), as an id is.
const MaxCancelKeyBytes = MaxIDBytes

// cancelKeys checks a message's cancel_key and resolves, read from
// field or header as where says: each optional, and when given held to
// CheckName.
func cancelKeys(m *Message, cancelWhere, cancelKey, resolvesWhere, resolves string) error {
	for _, f := range []struct{ name, v string }{{cancelWhere, cancelKey}, {resolvesWhere, resolves}} {
		if f.v == "" {
			continue
		}
		if err := CheckName(f.name, f.v, MaxCancelKeyBytes); err != nil {
			return err
		}
	}
	m.CancelKey, m.Resolves = cancelKey, resolves
	return nil
}

// message checks the fields of a read envelope (and the headers that
// stand in for them) and returns the Message they make, raw its bytes. A
// check (ParseCheck) is held to the same checks through it.
func (env *envelope) message(raw []byte, headerID, headerTZ string) (Message, error) {
	m := Message{Raw: raw}
	var err error
	idField, id := "id", env.ID
	switch {
	case id != "":
	case env.UUID != "":
		idField, id = "uuid", env.UUID
	case headerID != "":
		idField, id = "id (the "+MsgIDHeader+" header)", headerID
	}
	if m.ID, err = requireField(idField, id, MaxIDBytes); err != nil {
		return Message{}, err
	}
	if m.Scene, err = requireField("scene", env.Scene, MaxSceneBytes); err != nil {
		return Message{}, err
	}
	// From here on an invalid message still names its scene, so reports can
	// count it where it belongs.
	scene := Message{Scene: m.Scene}
	if m.ReceiveID, err = requireField("receive_id", env.ReceiveID, MaxReceiveIDBytes); err != nil {
		return scene, err
	}
	m.ReceiveIDType = env.ReceiveIDType
	if m.ReceiveIDType == "" {
		m.ReceiveIDType = "open_id" // Feishu's default id type
	}
	if err := checkReceiveIDType("", m.ReceiveIDType); err != nil {
		return scene, err
	}
	m.ReceiveID = RecipientID(m.ReceiveIDType, m.ReceiveID)
	if m.Priority, err = parsePriority("priority", env.Priority); err != nil {
		return scene, err
	}
	tzField, tz := "tz", env.TZ
	if headerTZ != "" {
		tzField, tz = TZHeader+" header", headerTZ
	}
	if m.Zone, err = parseZone(tzField, tz); err != nil {
		return scene, err
	}
	m.TZ = tz
	if err := cancelKeys(&m, "cancel_key", env.CancelKey, "resolves", env.Resolves); err != nil {
		return scene, err
	}
	return m, nil
}

// checkBody is what every body must pass, decoded or not: within maxBytes
// (0 means DefaultMaxMessageBytes), not empty, valid UTF-8 without NUL
// bytes, so that a suppression row can store it as PostgreSQL text on
// either path; kind names what it should be.
func checkBody(data []byte, maxBytes int, kind string) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxMessageBytes
	}
	if len(data) > maxBytes {
		return invalidf("message is %d bytes, over the limit of %d", len(data), maxBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return invalidf("message is empty")
	}
	if !utf8.Valid(data) {
		return invalidf("message is not valid %s", kind)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return invalidf("message contains a NUL byte (at byte %d)", i)
	}
	return nil
}

// checkReceiveIDType refuses a receive_id_type Feishu does not accept;
// where, when not empty, says where it was read.
func checkReceiveIDType(where, typ string) error {
	if receiveIDTypes[typ] {
		return nil
	}
	return invalidf("%sreceive_id_type %q is not one of open_id, user_id, union_id, email, chat_id", where, clip(typ))
}

// parseZone loads the time zone named name: nil when v is empty, an
// *InvalidError that names the field when it is unknown.
func parseZone(name, v string) (*time.Location, error) {
	if v == "" {
		return nil, nil
	}
	loc, err := LoadZone(v)
	if err != nil {
		return nil, invalidf("%s %q is an unknown time zone: want an IANA name such as Asia/Shanghai", name, clip(v))
	}
	return loc, nil
}

// parsePriority reads the priority named name: empty means normal.
func parsePriority(name, v string) (Priority, error) {
	if v == "" {
		return PriorityNormal, nil
	}
	if p := Priority(v); ValidPriority(p) {
		return p, nil
	}
	return "", invalidf("%s %q is not one of low, normal, high, urgent", name, clip(v))
}

func requireField(name, v string, max int) (string, error) {
	if err := CheckName(name, v, max); err != nil {
		return "", err
	}
	return v, nil
}

// clip shortens untrusted text before it goes into an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Headers a producer may set on an inbound message so that the gate decides
// it without decoding the body: see ParseDelivery. NATS header names are
// case-sensitive.
const (
	MsgIDHeader     = "Nats-Msg-Id"
	SceneHeader     = "Gate-Scene"
	RecipientHeader = "Gate-Recipient" // receive_id_type:receive_id
	PriorityHeader  = "Gate-Priority"
	// TZHeader names the recipient's IANA time zone, as the tz field does;
	// it wins over the tz field when both are set.
	TZHeader = "Gate-TZ"
	// CancelKeyHeader and ResolvesHeader stand for the cancel_key and
	// resolves fields; each wins over its field when set.
	CancelKeyHeader = "Gate-Cancel-Key"
	ResolvesHeader  = "Gate-Resolves"
)

// ParseDelivery parses a delivered message. maxBytes is as for ParseMessage.
//
// When the producer set the Nats-Msg-Id, Gate-Scene and Gate-Recipient
// headers (d.HeaderID, d.HeaderScene and d.HeaderRecipient all non-empty),
// the message is taken from them and the body is not decoded: the header
// fast path. The headers are trusted; whatever the body says about id,
// scene, recipient or priority is not read. Gate-Recipient is
// receive_id_type:receive_id, cut at the first ':', both parts required;
// Gate-Priority and Gate-TZ are optional. Since the body is not decoded on
// this path, its tz field is not read either: only Gate-TZ gives such a
// message a zone of its own. Header values are held to the checks of the
// body's fields (CheckName for the id, scene and receive_id, the known
// values for the id type and priority), and an invalid one gives an
// *InvalidError naming the header; a header is any bytes a producer sent,
// so this is where invalid UTF-8 stops. The body is still checked as bytes,
// not as JSON, as every body is first: within maxBytes, not empty, valid
// UTF-8 without NUL bytes. Raw is d.Data, untouched.
//
// Otherwise it is ParseMessage(d.Data, d.HeaderID, maxBytes), except that a
// Gate-TZ header wins over the body's tz field (which is then not read).
//
// On either path, a message that gives a header the gate reads more than
// once (d.RepeatedHeader, see Delivery.ReadHeaders) is invalid, with an
// error naming the header.
func ParseDelivery(d Delivery, maxBytes int) (Message, error) {
	if d.RepeatedHeader != "" {
		return Message{}, invalidf("%s header is given more than once: a header the gate reads must be given once, as a key of the body must, since readers that take the first value and the last would read two messages", d.RepeatedHeader)
	}
	if d.HeaderID == "" || d.HeaderScene == "" || d.HeaderRecipient == "" {
		m, err := parseMessage(d.Data, d.HeaderID, d.HeaderTZ, maxBytes)
		if err != nil || (d.HeaderCancelKey == "" && d.HeaderResolves == "") {
			return m, err
		}
		cancelKey, cancelWhere := headerOr(d.HeaderCancelKey, CancelKeyHeader+" header", m.CancelKey, "cancel_key")
		resolves, resolvesWhere := headerOr(d.HeaderResolves, ResolvesHeader+" header", m.Resolves, "resolves")
		if err := cancelKeys(&m, cancelWhere, cancelKey, resolvesWhere, resolves); err != nil {
			return Message{Scene: m.Scene}, err
		}
		return m, nil
	}
	data := d.Data
	if err := checkBody(data, maxBytes, "UTF-8"); err != nil {
		return Message{}, err
	}
	m := Message{Raw: data}
	var err error
	if m.ID, err = requireField(MsgIDHeader+" header", d.HeaderID, MaxIDBytes); err != nil {
		return Message{}, err
	}
	if m.Scene, err = requireField(SceneHeader+" header", d.HeaderScene, MaxSceneBytes); err != nil {
		return Message{}, err
	}
	scene := Message{Scene: m.Scene}
	typ, id, ok := strings.Cut(d.HeaderRecipient, ":")
	if !ok || typ == "" || id == "" {
		return scene, invalidf("%s header %q is not receive_id_type:receive_id", RecipientHeader, clip(d.HeaderRecipient))
	}
	if m.ReceiveID, err = requireField("receive_id of the "+RecipientHeader+" header", id, MaxReceiveIDBytes); err != nil {
		return scene, err
	}
	if err := checkReceiveIDType(RecipientHeader+" header: ", typ); err != nil {
		return scene, err
	}
	m.ReceiveIDType, m.ReceiveID = typ, RecipientID(typ, m.ReceiveID)
	if m.Priority, err = parsePriority(PriorityHeader+" header", d.HeaderPriority); err != nil {
		return scene, err
	}
	if m.Zone, err = parseZone(TZHeader+" header", d.HeaderTZ); err != nil {
		return scene, err
	}
	m.TZ = d.HeaderTZ
	if err := cancelKeys(&m, CancelKeyHeader+" header", d.HeaderCancelKey, ResolvesHeader+" header", d.HeaderResolves); err != nil {
		return scene, err
	}
	return m, nil
}

// headerOr is the header's value and its name when the header is set, else
// the field's.
func headerOr(header, headerName, field, fieldName string) (string, string) {
	if header != "" {
		return header, headerName
	}
	return field, fieldName
}
