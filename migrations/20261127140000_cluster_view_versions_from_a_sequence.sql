-- A cluster's stored view (cluster_view) gets its version from a sequence, as a template's does
-- (template_view): the row here is removed with the cluster, so a cluster deleted and made again
-- with the same uuid (a re-import, a forget and import) started counting again from 0, and a
-- view built from its earlier life's rows could be stored under a version its new life had
-- reached. From one sequence, no two lives of a uuid share a version.
-- The retire function becomes PL/pgSQL: a LANGUAGE sql function is planned again on every call
-- (the nodegroup trigger calls it for every nodegroup written), PL/pgSQL keeps its plan.
CREATE SEQUENCE cluster_view_version;
SELECT setval('cluster_view_version', COALESCE((SELECT max(version) FROM cluster_view), 0) + 1);
ALTER TABLE cluster_view ALTER COLUMN version SET DEFAULT nextval('cluster_view_version');

CREATE OR REPLACE FUNCTION magnum_capi_retire_cluster_view(u uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_view SET version = nextval('cluster_view_version'), body = NULL
     WHERE cluster_uuid = u;
END $$;

CREATE OR REPLACE FUNCTION magnum_capi_cluster_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM cluster_view WHERE cluster_uuid = OLD.uuid;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.uuid IS DISTINCT FROM NEW.uuid THEN
        DELETE FROM cluster_view WHERE cluster_uuid = OLD.uuid;
    END IF;
    INSERT INTO cluster_view AS v (cluster_uuid) VALUES (NEW.uuid)
    ON CONFLICT (cluster_uuid) DO UPDATE SET version = nextval('cluster_view_version'), body = NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION magnum_capi_template_view_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_view SET version = nextval('cluster_view_version'), body = NULL
     WHERE cluster_uuid IN (SELECT uuid FROM cluster
                             WHERE cluster_template_id IN (OLD.uuid, NEW.uuid));
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION magnum_capi_all_cluster_views_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'cluster' THEN
        DELETE FROM cluster_view;
    ELSE
        UPDATE cluster_view SET version = nextval('cluster_view_version'), body = NULL;
    END IF;
    RETURN NULL;
END $$;
