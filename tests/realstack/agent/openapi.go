package main

import (
	"encoding/json"
	"net/http"
	"strings"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
)

// OpenAPI: a real kube-apiserver publishes every kind's schema at /openapi/v2 and /openapi/v3,
// and Helm (as CAAPH runs it, with OpenAPI validation on) reads them before it creates a
// release's objects: it asks /openapi/v3 whether the server validates fields itself, falls back
// to /openapi/v2, and validates client-side against the schemas found there. A server without
// these paths fails every install ("failed to download openapi"). The in-memory store has no
// schemas to publish, so the agent serves well-formed documents that describe no kind: Helm then
// finds no model for an object and skips client-side validation, as it does for any kind a
// server does not describe. Objects are still decoded into their Go types by the store, so an
// object that is not of its kind is refused there.

// openAPIV2ProtoType is the content type of /openapi/v2 in protobuf as the kube-apiserver sends
// it (client-go's discovery asks for protobuf only, as "…spec.v2@v1.0+protobuf", which is not a
// valid media type to answer with).
const openAPIV2ProtoType = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

// serveOpenAPI answers /openapi/v2 (protobuf when asked for, else JSON) and /openapi/v3 (the
// index of group-version documents: none).
func serveOpenAPI(rw http.ResponseWriter, r *http.Request, version string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if version == "" {
		version = "v0.0.0"
	}
	if r.URL.Path == "/openapi/v3" {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string]any{"paths": map[string]any{}})
		return
	}
	doc := &openapiv2.Document{
		Swagger: "2.0",
		Info:    &openapiv2.Info{Title: "Kubernetes (realstack node agent: no schemas)", Version: version},
		Paths:   &openapiv2.Paths{},
	}
	if strings.Contains(r.Header.Get("Accept"), "protobuf") {
		b, err := proto.Marshal(doc)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", openAPIV2ProtoType)
		_, _ = rw.Write(b)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]any{
		"swagger": doc.Swagger,
		"info":    map[string]string{"title": doc.Info.Title, "version": doc.Info.Version},
		"paths":   map[string]any{},
	})
}
