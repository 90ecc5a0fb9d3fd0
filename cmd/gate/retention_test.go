package main

import (
	"io"
	"strings"
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

func TestPartitionSettings(t *testing.T) {
	tests := []struct {
		name, value  string
		width, every time.Duration
		bad          string // part of the error
	}{
		{width: 24 * time.Hour, every: time.Hour},
		{name: "GATE_PARTITION_WIDTH", value: "1h", width: time.Hour, every: time.Hour},
		{name: "GATE_PARTITION_WIDTH", value: "10m", width: 10 * time.Minute, every: time.Hour},
		{name: "GATE_PARTITION_WIDTH", value: "7m", bad: "divides a day evenly"},
		{name: "GATE_PARTITION_WIDTH", value: "5m", bad: "divides a day evenly"},
		{name: "GATE_PARTITION_WIDTH", value: "48h", bad: "divides a day evenly"},
		{name: "GATE_PARTITION_WIDTH", value: "a day", bad: "divides a day evenly"},
		{name: "GATE_PRUNE_INTERVAL", value: "5m", width: 24 * time.Hour, every: 5 * time.Minute},
		{name: "GATE_PRUNE_INTERVAL", value: "10s", bad: "at least 1m"},
	}
	for _, tt := range tests {
		env := map[string]string{tt.name: tt.value}
		c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
		switch {
		case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("%s=%q: error %v, want one saying %q", tt.name, tt.value, err, tt.bad)
		case tt.bad == "" && err != nil:
			t.Errorf("%s=%q: %v", tt.name, tt.value, err)
		case tt.bad == "" && (c.PartitionWidth != tt.width || c.PruneInterval != tt.every):
			t.Errorf("%s=%q: width %s, prune interval %s; want %s, %s", tt.name, tt.value, c.PartitionWidth, c.PruneInterval, tt.width, tt.every)
		}
	}
}
