//! A simulated management cluster for `serve --dev` and the tests: an in-process Kubernetes API
//! and a CAPI/CAPO simulator that plays the controllers. Never used against real infrastructure.
