-- Issue 19: the management cluster (`[[capi.management_clusters]]` name) a cluster was placed on
-- at create. NULL: the unnamed one (`[capi] kubeconfig`), which holds every cluster recorded
-- before placement existed. Never changes implicitly afterwards.
ALTER TABLE cluster ADD COLUMN management_cluster text;
CREATE INDEX cluster_management_cluster ON cluster (management_cluster);
