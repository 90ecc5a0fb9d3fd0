package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/antifatigue/gate/internal/gate"
)

// Explainer explains what a message of a scene to a recipient would get
// now, recording nothing (the pipeline's Explainer). Its errors wrap
// gate.ErrBadRequest for a question that is not valid, or
// gate.ErrUnavailable when a store did not answer.
type Explainer interface {
	Explain(ctx context.Context, recipient, scene, priority, tz string) (gate.Explanation, error)
}

// explainParams are the query parameters GET /v1/explain takes.
var explainParams = []string{"recipient", "scene", "priority", "tz"}

// explain serves GET /v1/explain: 200 with the explanation, 400 for a
// parameter that is unknown, given twice, missing or not valid, 503 when
// a store did not answer. An unknown scene is no 404: the answer explains
// the rules' unknown_scene action.
func (s *server) explain(w http.ResponseWriter, r *http.Request, q url.Values) error {
	if err := onlyParams(q, "GET /v1/explain", explainParams); err != nil {
		return err
	}
	for _, name := range explainParams {
		if len(q[name]) > 1 {
			return badRequest("%s is given %d times: GET /v1/explain takes it once", name, len(q[name]))
		}
	}
	for i, name := range explainParams {
		vs, given := q[name]
		switch {
		case i < 2 && (!given || vs[0] == ""):
			return badRequest("%s is required: GET /v1/explain?recipient=receive_id_type:receive_id&scene=<scene>", name)
		case given && vs[0] == "":
			return badRequest("%s is empty: leave it out for the default", name)
		}
	}
	e, err := s.o.Explainer.Explain(r.Context(), q.Get("recipient"), q.Get("scene"), q.Get("priority"), q.Get("tz"))
	if err != nil {
		s.fail(w, r, err, message(err, "the window store or the audit store did not answer: ask again"))
		return nil
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}
