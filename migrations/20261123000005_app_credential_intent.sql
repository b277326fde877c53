-- Application credentials about to be created for a cluster, recorded (never the secret) before
-- the Keystone call: the credentials janitor finds what a crash between creating a credential and
-- committing its cluster left in Keystone. Kept until the janitor has looked after a grace time.
CREATE TABLE app_credential_intent (
    cluster_uuid uuid        NOT NULL,
    user_id      text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_uuid, user_id)
);
CREATE INDEX app_credential_intent_created ON app_credential_intent (created_at);
