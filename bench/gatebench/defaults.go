package main

import "github.com/antifatigue/gate/internal/natsbus"

// The gate's own defaults, which the gate under test runs on: the subjects
// the benchmark publishes and checks on, the batch size it assumes, and the
// decision header of a forward (forwardMsgs).
const (
	inSubject      = natsbus.DefaultInSubject
	checkSubject   = natsbus.DefaultCheckSubject
	defaultBatch   = natsbus.DefaultBatch
	headerDecision = natsbus.HeaderDecision
)
