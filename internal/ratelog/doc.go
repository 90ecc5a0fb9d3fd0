// Package ratelog keeps a failing dependency from flooding the log: of a
// run of failures, the first is logged at once, then one a minute while
// the run lasts, and its end once.
//
// It imports the standard library only.
package ratelog
