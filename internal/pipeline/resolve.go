package pipeline

import "github.com/antifatigue/gate/internal/gate"

// resolve decides every item still to decide on its plan and the window
// store's answer (gate.Resolve): the store answered it, or its plan needs
// no window.
func (c *core) resolve(rules *gate.RuleSet, items []item) {
	now := c.now()
	for i := range items {
		if it := &items[i]; it.state == toDecide {
			it.decide(gate.Resolve(rules, it.plan, it.res, now))
		}
	}
}
