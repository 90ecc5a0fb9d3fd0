// Package procstat reads CPU time from Linux's /proc through
// github.com/prometheus/procfs, for benchmarks that report what each
// process of a run spent (cmd/gatebench, the Redis and PostgreSQL
// benchmarks). Every function answers 0 when /proc cannot be read, so a
// benchmark on another system reports no CPU figure rather than failing.
//
// It imports the standard library and procfs, and is imported only by
// tests and measuring tools.
package procstat
