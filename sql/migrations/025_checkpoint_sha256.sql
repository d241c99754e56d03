-- The checksum of a checkpoint's copy where the driver stores it as one
-- file (kubernetes: <store>/<id>.tar, docs/checkpoints.md). A fork's
-- restore refuses a copy whose sha256 differs. NULL: the driver keeps no
-- single file (local).

ALTER TABLE checkpoints ADD COLUMN sha256 text CHECK (sha256 ~ '^[0-9a-f]{64}$');
