package natsbus

import (
	"os"
	"strings"
	"testing"
)

// docs/operating.md shows the embedded server's roles for a NATS server of
// one's own: the block it shows is RolesConfig of the default subjects, so
// that an operator who copies it gets what the embedded server enforces.
func TestRolesConfigIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	want := RolesConfig(EmbeddedOptions{})
	if !strings.Contains(string(doc), "```\n"+want+"```\n") {
		t.Errorf("docs/operating.md does not show the embedded server's roles as they are; the block should read:\n%s", want)
	}
}
