-- Issue 25: clusters imported from a Magnum database (`magnum-capi import`). One row per imported
-- cluster (its cluster row holds every value Magnum showed):
--   source_driver  the Magnum driver that made it (`k8s_capi_helm_v1`, `k8s_cluster_api_ubuntu`,
--                  `k8s_fedora_coreos_v1`, … or `unknown`), found as `driver_basis` says;
--   stack_id       that driver's own name for it in Magnum (the CAPI Cluster / Helm release name,
--                  or the Heat stack), what adoption looks the cluster's objects up by;
--   state          what magnum-capi may do with it: `read_only` (listed and shown as in Magnum,
--                  every change refused, left alone by the status writer). Adoption adds states.
CREATE TABLE imported_cluster (
    cluster_uuid   uuid PRIMARY KEY REFERENCES cluster (uuid) ON DELETE CASCADE,
    source_driver  text NOT NULL,
    driver_basis   text NOT NULL,
    stack_id       text,
    state          text NOT NULL DEFAULT 'read_only' CHECK (state IN ('read_only')),
    imported_at    timestamptz NOT NULL DEFAULT now(),
    last_import_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX imported_cluster_state ON imported_cluster (state);
