package gormstore

import (
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/porttest"
)

func TestPortsSQLite(t *testing.T)   { runPorts(t, sqliteOptions) }
func TestPortsPostgres(t *testing.T) { runPorts(t, postgresOptions) }

// runPorts runs the shared suites of the audit log, the hold store and the
// preference store on one dialect, each case on a fresh database.
func runPorts(t *testing.T, fresh freshFunc) {
	t.Run("AuditLog", func(t *testing.T) {
		porttest.RunAuditLog(t, porttest.AuditHarness{Open: func(t *testing.T) gate.AuditLog { return MustOpen(t, fresh(t)) }})
	})
	t.Run("HoldStore", func(t *testing.T) {
		porttest.RunHoldStore(t, porttest.HoldHarness{Open: func(t *testing.T) (gate.AuditLog, gate.HoldStore) {
			s := MustOpen(t, fresh(t))
			return s, s
		}})
	})
	t.Run("PreferenceStore", func(t *testing.T) {
		porttest.RunPreferenceStore(t, porttest.PreferenceHarness{Open: func(t *testing.T) gate.PreferenceStore { return MustOpen(t, fresh(t)) }})
	})
}
