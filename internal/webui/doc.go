// Package webui is the gate's report page: plain HTML, CSS and JavaScript,
// embedded in the binary, with no build step and nothing loaded from
// elsewhere. The page reads the /v1/* report API with the API token, which
// the reader types in and which stays in the tab's sessionStorage.
//
// Page and Assets serve the files with a strict Content-Security-Policy:
// scripts and styles only from the gate itself, no inline script or style,
// no framing. The script writes untrusted text (scenes, recipients,
// payloads) with textContent only, never as markup.
//
// It imports only the standard library.
package webui
