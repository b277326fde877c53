-- Day-2 state of a cluster's credential and CAs (never secrets):
--   app_cred_expires_at   expiry of the current application credential (NULL = none);
--   credential_problem    why the current credential no longer works, as the periodic check
--                         found it (NULL = it authenticated last time, or not checked yet);
--   credential_checked_at when the periodic check last looked at it;
--   ca_rotation_phase     1..3 while a CA rotation is under way (see README), NULL otherwise;
--   ca_rollout_after      the rollout marker rendered into KubeadmControlPlane and
--                         MachineDeployments (`spec.rollout.after`) by the last CA rotation phase.
ALTER TABLE cluster
    ADD COLUMN app_cred_expires_at   timestamptz,
    ADD COLUMN credential_problem    text,
    ADD COLUMN credential_checked_at timestamptz,
    ADD COLUMN ca_rotation_phase     smallint,
    ADD COLUMN ca_rollout_after      timestamptz;
