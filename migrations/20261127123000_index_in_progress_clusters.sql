-- The status writer asks for the next deadline of the clusters in progress after every pass
-- (`status_writer::next_deadline`): without an index that is a scan of every cluster row per
-- management-cluster change (~150 ms at 100,000 clusters). Only in-progress rows are indexed,
-- so the index stays as small as the work under way.
CREATE INDEX cluster_in_progress ON cluster (status)
    WHERE status IN ('CREATE_IN_PROGRESS', 'UPDATE_IN_PROGRESS');
