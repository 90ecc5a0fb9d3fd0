package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// setting is one value a command reads: from its flag when given, else
// from its GATE_* variable when set, else its default. A setting with no
// flag is read from its variable alone (the API token of the client
// commands); one with no variable from its flag alone. A secret one (a
// password, a token) is masked wherever the gate logs or prints it; prefer
// its variable to its flag, which other users of the host can read.
type setting struct {
	flag, env, def, help string
	secret               bool
	set                  func(string) error
}

// parseSettings is the one way every command reads its settings: it adds
// ss to fs, beside the plain flags fs has already, parses args, then sets
// each of ss from its flag, variable or default, in that order of
// precedence. It returns the flags of ss whose value came from a flag or a
// variable rather than the default. A flag mistake is a usageError, and so
// are bad values, all of them in one error; flag.ErrHelp comes back as is.
// Positional arguments are the caller's (fs.Args).
func parseSettings(fs *flag.FlagSet, ss []setting, args []string, getenv func(string) string) (map[string]bool, error) {
	vals := make(map[string]*string, len(ss))
	for _, s := range ss {
		if s.flag == "" {
			continue
		}
		help := fmt.Sprintf("%s (default %q)", s.help, s.def)
		if s.env != "" {
			help = fmt.Sprintf("%s (env %s, default %q)", s.help, s.env, s.def)
		}
		vals[s.flag] = fs.String(s.flag, "", help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{err.Error()}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	explicit := make(map[string]bool, len(ss))
	var errs []string
	for _, s := range ss {
		v, from := s.def, "default"
		if e := getenv(s.env); s.env != "" && e != "" {
			v, from = e, s.env
		}
		if s.flag != "" && given[s.flag] {
			v, from = *vals[s.flag], "--"+s.flag
		}
		explicit[s.flag] = from != "default"
		if err := s.set(strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", from, err))
		}
	}
	if len(errs) > 0 {
		return nil, &usageError{"bad configuration: " + strings.Join(errs, "; ")}
	}
	return explicit, nil
}

// only is the settings of ss whose flags are named, in table order: a
// command that needs a few of serve's settings reads them under the same
// flags, variables and defaults.
func only(ss []setting, flags ...string) []setting {
	var out []setting
	for _, s := range ss {
		for _, f := range flags {
			if s.flag == f {
				out = append(out, s)
			}
		}
	}
	return out
}

// The setters of the settings table: each parses a value into its field,
// or says what it wants.

func str(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

// parsed stores parse's value in p, or fails with "want <want>, got v"
// when parse refuses v.
func parsed[T any](p *T, want string, parse func(string) (T, bool)) func(string) error {
	return func(v string) error {
		x, ok := parse(v)
		if !ok {
			return fmt.Errorf("want %s, got %q", want, v)
		}
		*p = x
		return nil
	}
}

func dur(p *time.Duration) func(string) error {
	return parsed(p, "a duration such as 200ms or 30s", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d >= 0
	})
}

// num reads a whole number of at least least.
func num(p *int, least int, want string) func(string) error {
	return parsed(p, want, func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= least
	})
}

// durationText is d as a default is written: 2h, 1m, 30s, 500ms, not
// time.Duration's 2h0m0s.
func durationText(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

func boolean(p *bool) func(string) error {
	return parsed(p, "true or false", func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}
