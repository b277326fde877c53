package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// What Helm reads before it creates a release's objects: client-go's discovery gets a
// well-formed OpenAPI v2 document (protobuf) that describes no kind, and an OpenAPI v3 index
// without group versions; neither is an error.
func TestOpenAPIDocumentsDescribeNoKind(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		serveOpenAPI(rw, r, "v1.30.4")
	}))
	defer srv.Close()
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("/openapi/v2: %v", err)
	}
	if doc.GetSwagger() != "2.0" || doc.GetInfo().GetVersion() != "v1.30.4" || len(doc.GetPaths().GetPath()) != 0 ||
		len(doc.GetDefinitions().GetAdditionalProperties()) != 0 {
		t.Fatalf("/openapi/v2: %v", doc)
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("/openapi/v3: %v", err)
	}
	if len(paths) != 0 {
		t.Fatalf("/openapi/v3: %v", paths)
	}
	rec := httptest.NewRecorder()
	serveOpenAPI(rec, httptest.NewRequest(http.MethodGet, "/openapi/v2", nil), "")
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" || rec.Code != http.StatusOK {
		t.Fatalf("/openapi/v2 as JSON: %d %s %s", rec.Code, ct, rec.Body)
	}
}
