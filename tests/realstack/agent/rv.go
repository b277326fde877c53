package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// resourceVersions keeps the resource versions the workload APIs hand out growing across agent
// restarts. The in-memory store numbers them from 1 in every new resource group, and a restarted
// agent starts every workload cluster anew: a client (CAPI's cached Node informer, KCP) that
// resumes a watch, or updates an object, with a version of the previous incarnation must be told
// it is too old (410 Gone, 409 Conflict), as a kube-apiserver tells it, instead of being served
// from the middle of the new history. So every version goes out as offset+n, the offset being the
// agent's start time in microseconds (far above anything an earlier incarnation handed out,
// unless it wrote more than a million objects a second), and comes back in as n.
type resourceVersions struct{ offset uint64 }

func newResourceVersions() resourceVersions {
	return resourceVersions{offset: uint64(time.Now().UnixMicro())}
}

func (t resourceVersions) external(rv string) string {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || rv == "" {
		return rv
	}
	return strconv.FormatUint(n+t.offset, 10)
}

// internal maps a version a client sends back; ok is false for one this incarnation never gave.
func (t resourceVersions) internal(rv string) (string, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || n < t.offset {
		return "", false
	}
	return strconv.FormatUint(n-t.offset, 10), true
}

// rewrite maps every resourceVersion of an object, a list or a watch event to the outside.
func (t resourceVersions) rewrite(doc map[string]any) {
	if md, ok := doc["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"].(string); ok {
			md["resourceVersion"] = t.external(rv)
		}
	}
	if items, ok := doc["items"].([]any); ok {
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				t.rewrite(m)
			}
		}
	}
	if obj, ok := doc["object"].(map[string]any); ok {
		if _, isEvent := doc["type"]; isEvent {
			t.rewrite(obj)
		}
	}
}

// inbound maps the resourceVersion of a request's JSON body (an update or a patch) to the
// inside; a version of an earlier incarnation becomes one no object has (a conflict).
func (t resourceVersions) inbound(body []byte) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		return body
	}
	rv, ok := md["resourceVersion"].(string)
	if !ok || rv == "" {
		return body
	}
	in, valid := t.internal(rv)
	if !valid {
		in = "0"
	}
	md["resourceVersion"] = in
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}

// rvWriter rewrites the JSON a handler writes: buffered whole for a plain response, value by
// value for a watch stream.
type rvWriter struct {
	http.ResponseWriter
	t       resourceVersions
	watch   bool
	status  int
	body    bytes.Buffer // a plain response, or what is left of a partly written watch event
	passRaw bool         // the watch stream is not JSON: pass it on as it is
}

func (w *rvWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if w.watch {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *rvWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.watch {
		return w.body.Write(p)
	}
	if w.passRaw {
		return w.ResponseWriter.Write(p)
	}
	w.body.Write(p)
	for w.body.Len() > 0 {
		dec := json.NewDecoder(bytes.NewReader(w.body.Bytes()))
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				break // the rest of the value comes with the next Write
			}
			w.passRaw = true
			rest := append([]byte(nil), w.body.Bytes()...)
			w.body.Reset()
			if _, err := w.ResponseWriter.Write(rest); err != nil {
				return 0, err
			}
			break
		}
		w.t.rewrite(doc)
		out, _ := json.Marshal(doc)
		out = append(out, '\n')
		if _, err := w.ResponseWriter.Write(out); err != nil {
			return 0, err
		}
		w.body.Next(int(dec.InputOffset()))
	}
	return len(p), nil
}

func (w *rvWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.watch {
		f.Flush()
	}
}

// finish writes a plain response, its versions rewritten.
func (w *rvWriter) finish() {
	if w.watch {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	out := w.body.Bytes()
	var doc map[string]any
	if json.Unmarshal(out, &doc) == nil {
		w.t.rewrite(doc)
		if b, err := json.Marshal(doc); err == nil {
			out = b
		}
	}
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(out)
}
