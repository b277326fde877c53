-- A cluster's stored view (cluster_view) is retired once per writing transaction, not once per
-- row it writes: a create inserted the cluster (its view row made, at a new version) and then
-- retired that row again for each of its two nodegroups in the same statement, and a resize or
-- a status pass retires it for every nodegroup and cluster row it touches — an UPDATE of
-- cluster_view and a version taken from the sequence each time, for nothing. A version this
-- transaction set (`retired_in`) cannot have been read by anyone else yet (the row stays locked
-- until the transaction ends), so no view built from older rows can be stored under it: moving
-- it again protects nothing. A body stored meanwhile (only by a hand-made transaction storing
-- its own view) is retired all the same.
-- `retired_in` is the 64-bit transaction id (never reused), not the row's `xmin`: a 32-bit xid
-- comes round again, and a row last written 2^32 transactions earlier would have been skipped.
-- A subtransaction's write is its top-level transaction's; if it is rolled back, so is the
-- row's `retired_in`.
ALTER TABLE cluster_view ADD COLUMN retired_in xid8;
ALTER TABLE cluster_view ALTER COLUMN retired_in SET DEFAULT pg_current_xact_id();

CREATE OR REPLACE FUNCTION magnum_capi_retire_cluster_view(u uuid) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_view
       SET version = nextval('cluster_view_version'), body = NULL, retired_in = pg_current_xact_id()
     WHERE cluster_uuid = u
       AND (retired_in IS DISTINCT FROM pg_current_xact_id() OR body IS NOT NULL);
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
    ON CONFLICT (cluster_uuid) DO UPDATE
       SET version = nextval('cluster_view_version'), body = NULL, retired_in = pg_current_xact_id()
     WHERE v.retired_in IS DISTINCT FROM pg_current_xact_id() OR v.body IS NOT NULL;
    RETURN NULL;
END $$;
