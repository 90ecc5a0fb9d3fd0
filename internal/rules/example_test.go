package rules_test

import (
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

// A rule document, as a file under rules/ or the Nacos config holds it.
// Limits come out sorted by window, and left-out keys get their defaults.
func ExampleParse() {
	doc := `
unknown_scene: forward          # forward | suppress | drop
recipient_caps:
  - {window: 24h, max: 20}
scenes:
  alert.disk_full:
    limits:
      - {window: 1d, max: 3}
      - {window: 60m, max: 1}
    bypass_priorities: [urgent]  # on_exceed left out: suppress
`
	rs, err := rules.Parse("rules/alerts.yaml", []byte(doc))
	if err != nil {
		fmt.Println(err)
		return
	}
	rule, _ := rs.Scene("alert.disk_full")
	for _, l := range rule.Limits {
		fmt.Printf("at most %d per %s\n", l.Max, gate.FormatDuration(l.Window))
	}
	fmt.Println("on exceed:", rule.OnExceed)
	fmt.Println("urgent bypasses:", rule.Bypasses("urgent"))
	// Output:
	// at most 1 per 1h
	// at most 3 per 1d
	// on exceed: suppress
	// urgent bypasses: true
}

// A rate limit admits a burst at once, then one message per emission
// interval (a GCRA); it sits beside window limits, which bound longer spans.
func ExampleParse_rate() {
	doc := `
scenes:
  chat.mention:
    limits:
      - {rate: 6/1h, burst: 3}   # 3 at once, then one per 10 minutes
      - {window: 1d, max: 20}
`
	rs, err := rules.Parse("rules/chat.yaml", []byte(doc))
	if err != nil {
		fmt.Println(err)
		return
	}
	rule, _ := rs.Scene("chat.mention")
	for _, l := range rule.Limits {
		if l.Rate != 0 {
			fmt.Printf("%d at once, then one per %s (rate %s)\n", l.Max, gate.FormatDuration(l.Rate), gate.FormatRate(l.Rate))
			continue
		}
		fmt.Printf("at most %d per %s\n", l.Max, gate.FormatDuration(l.Window))
	}
	// Output:
	// at most 20 per 1d
	// 3 at once, then one per 10m (rate 1/10m)
}

// A document that does not validate is rejected whole, with every problem
// named by file, line, column and path.
func ExampleParse_invalid() {
	doc := `
scenes:
  alert.disk_full:
    limits:
      - {window: 1h, max: 1}
      - {window: 0s, max: 3}
    on_exeed: drop
`
	_, err := rules.Parse("rules/alerts.yaml", []byte(doc))
	fmt.Println(err)
	// Output:
	// rules/alerts.yaml:6:18: scenes.alert.disk_full.limits[1].window: must be positive, got "0s"
	// rules/alerts.yaml:7:5: scenes.alert.disk_full: unknown key "on_exeed" (did you mean "on_exceed"?); allowed keys: limits, on_exceed, bypass_priorities, shadow, on_store_error, max_defer, defer_fallback, digest_group, tz, quiet_hours
}

// Format writes the canonical form of a rule set, for diffs.
func ExampleFormat() {
	rs, err := rules.Parse("rules.yaml", []byte(`
scenes:
  job.retry_notice: {limits: [{window: 24h, max: 3}], on_exceed: drop}
  alert.disk_full:
    limits: [{window: 24h, max: 3}, {window: 1h, max: 1}]
    bypass_priorities: [urgent]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(rules.Format(rs)))
	// Output:
	// unknown_scene: forward
	// scenes:
	//   alert.disk_full:
	//     limits:
	//       - {window: 1h, max: 1}
	//       - {window: 1d, max: 3}
	//     on_exceed: suppress
	//     bypass_priorities: [urgent]
	//   job.retry_notice:
	//     limits:
	//       - {window: 1d, max: 3}
	//     on_exceed: drop
}
