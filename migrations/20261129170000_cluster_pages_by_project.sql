-- A project's clusters in id order, so a page of them (the default sort, `limit` and `marker`)
-- is one index range: from the marker, `limit` rows of the project. With only `project_id`
-- indexed, a page walked the primary key from the start and dropped every other project's rows
-- and every row before the marker (thousands, for a marker deep in a large project), or fetched
-- all of the project's rows and sorted them. The new index serves every look-up by project the
-- old one did.
CREATE INDEX cluster_project_id_idx ON cluster (project_id, id);
DROP INDEX cluster_project_idx;
