-- The id (never the secret) of each cluster's Keystone application credential, and credentials
-- this service created that still have to be deleted (Keystone unreachable at the time).
ALTER TABLE cluster ADD COLUMN app_cred_id text;

CREATE TABLE app_credential_leftover (
    id            text PRIMARY KEY,
    user_id       text NOT NULL,
    cluster_uuid  uuid NOT NULL,
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    not_before    timestamptz NOT NULL DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now()
);
