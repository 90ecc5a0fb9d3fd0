package main

import (
	"io"
	"testing"
	"time"
)

func TestAuditRetentionSetting(t *testing.T) {
	tests := []struct {
		env, flag string
		want      time.Duration
		bad       bool
	}{
		{want: 90 * 24 * time.Hour},
		{env: "30d", want: 30 * 24 * time.Hour},
		{env: "36h", want: 36 * time.Hour},
		{env: "0", want: 0},
		{env: "30d", flag: "7d", want: 7 * 24 * time.Hour},
		{env: "-1h", bad: true},
		{env: "a month", bad: true},
	}
	for _, tt := range tests {
		var args []string
		if tt.flag != "" {
			args = []string{"--audit-retention", tt.flag}
		}
		env := map[string]string{"GATE_AUDIT_RETENTION": tt.env}
		c, err := parseConfig(args, func(k string) string { return env[k] }, io.Discard)
		switch {
		case tt.bad && err == nil:
			t.Errorf("GATE_AUDIT_RETENTION=%q: got %s, want an error", tt.env, c.AuditRetention)
		case !tt.bad && err != nil:
			t.Errorf("GATE_AUDIT_RETENTION=%q --audit-retention=%q: %v", tt.env, tt.flag, err)
		case !tt.bad && c.AuditRetention != tt.want:
			t.Errorf("GATE_AUDIT_RETENTION=%q --audit-retention=%q: got %s, want %s", tt.env, tt.flag, c.AuditRetention, tt.want)
		}
	}
}
