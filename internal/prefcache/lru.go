package prefcache

import (
	"container/list"

	"github.com/antifatigue/gate/internal/gate"
)

// lru is a least-recently-used map of recipients to their preferences (nil
// for a recipient without), of at most max entries. It is not safe for
// concurrent use: the Cache holds its lock around it.
type lru struct {
	max   int
	order *list.List // of *entry, most recently used first
	items map[string]*list.Element
}

type entry struct {
	recipient string
	prefs     *gate.Preferences
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns the entry of recipient, and whether there is one.
func (l *lru) get(recipient string) (*gate.Preferences, bool) {
	el, ok := l.items[recipient]
	if !ok {
		return nil, false
	}
	l.order.MoveToFront(el)
	return el.Value.(*entry).prefs, true
}

// put sets the entry of recipient, evicting the least recently used entry
// when full.
func (l *lru) put(recipient string, prefs *gate.Preferences) {
	if el, ok := l.items[recipient]; ok {
		el.Value.(*entry).prefs = prefs
		l.order.MoveToFront(el)
		return
	}
	l.items[recipient] = l.order.PushFront(&entry{recipient, prefs})
	for l.order.Len() > l.max {
		last := l.order.Back()
		l.order.Remove(last)
		delete(l.items, last.Value.(*entry).recipient)
	}
}

func (l *lru) remove(recipient string) {
	if el, ok := l.items[recipient]; ok {
		l.order.Remove(el)
		delete(l.items, recipient)
	}
}

func (l *lru) clear() {
	l.order.Init()
	clear(l.items)
}

func (l *lru) len() int { return l.order.Len() }
