package httpapi

import (
	_ "embed"
	"net/http"
	"net/url"
)

// openapiDoc is the OpenAPI 3 description of every endpoint, written by
// hand. openapi_test.go keeps its schemas in step with the Go types the
// handlers encode.
//
//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the OpenAPI 3 document served at /v1/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openapiDoc...) }

func (s *server) openapi(w http.ResponseWriter, _ *http.Request, _ url.Values) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiDoc) // the client went away; nothing to do
	return nil
}
