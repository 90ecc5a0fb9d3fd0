package rules

// The scenes mapping: scene names and each scene's rule.

import (
	"fmt"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/antifatigue/gate/internal/gate"
)

func (p *docParser) sceneMap(n *yaml.Node) {
	if isNull(n) {
		p.failf(n, "scenes", "must be a mapping of scene names to rules, got null (write scenes: {} for none)")
		return
	}
	fields, _ := p.mapping(n, "scenes", nil)
	for _, f := range fields {
		if !p.sceneName(f.key) {
			continue
		}
		path := scenePath(f.name)
		if first, ok := p.scenes[f.name]; ok {
			p.failf(f.key, path, "also defined at %s; a scene may be defined in one file only", first)
			continue
		}
		p.scenes[f.name] = p.at(f.key)
		p.set.Scenes[f.name] = p.scene(f.val, path)
	}
}

// sceneName checks a scene name as a message would carry it: gate.CheckName,
// the check every message's scene passes, so that a rule never names a
// scene no message can carry; and no whitespace at all, which a message may
// carry inside a scene but which a person reading or editing the rule could
// not tell apart.
func (p *docParser) sceneName(k *yaml.Node) bool {
	name := k.Value
	if isNull(k) {
		name = ""
	}
	if reason := nameProblem("scene name", name); reason != "" {
		p.failf(k, "scenes", "%s", reason)
		return false
	}
	return true
}

// nameProblem is why name, called what, cannot name a scene (or a group of
// scenes), or "" when it can.
func nameProblem(what, name string) string {
	field := what // quoted when that helps find it: not empty, not huge
	if name != "" && len(name) <= gate.MaxSceneBytes {
		field = fmt.Sprintf("%s %q", what, name)
	}
	reason := gate.InvalidReason(gate.CheckName(field, name, gate.MaxSceneBytes))
	if reason == "" && strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		reason = field + " contains whitespace"
	}
	return reason
}

func (p *docParser) scene(n *yaml.Node, path string) gate.SceneRule {
	rule := gate.SceneRule{OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry}
	fields, ok := p.mapping(n, path, sceneKeys)
	if !ok {
		return rule
	}
	p.require(n, path, fields, "limits")
	for _, f := range fields {
		fp := path + "." + f.name
		switch f.name {
		case "limits":
			rule.Limits = p.limits(f.val, fp)
			if f.val.Kind == yaml.SequenceNode && len(f.val.Content) == 0 {
				p.failf(f.val, fp, "a scene needs at least one limit, such as [{window: 1h, max: 1}]")
			}
		case "on_exceed":
			rule.OnExceed = p.action(f.val, fp, gate.ActionSuppress, gate.ActionDrop, gate.ActionDefer, gate.ActionDigest)
		case "bypass_priorities":
			rule.BypassPriorities = p.priorities(f.val, fp)
		case "shadow":
			rule.Shadow = p.boolean(f.val, fp)
		case "on_store_error":
			rule.OnStoreError = p.action(f.val, fp, gate.ActionRetry, gate.ActionForward)
		default:
			p.holdKey(f, fp, &rule)
		}
	}
	p.holdDefaults(path, fields, &rule)
	return rule
}
