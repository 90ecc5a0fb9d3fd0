// Package preview answers "what would these rules have done?": it replays
// the decisions the ledger recorded over a period, oldest first, against a
// proposed rule document, and counts per scene what was decided then and
// what the document would decide now (gate rules preview, POST
// /v1/rules/preview, and the preview gate rules push prints).
//
// Each decision is planned and resolved as the pipeline does it
// (gate.PlanMessage, gate.Resolve) through a window store of its own, an
// internal/inmem store whose clock is set to each decision's time: sliding
// and calendar limits, recipient caps, quiet hours in the message's or the
// scene's zone, bypass priorities and unknown_scene all apply as they would
// have. Nothing is written anywhere: the gate's own windows are not touched.
//
// It may import the standard library, internal/gate, internal/inmem and
// internal/rules (to read a document exactly as a rule file or Nacos is
// read); it sees the ledger through its own one-method interface.
package preview
