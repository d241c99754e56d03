-- The local driver's image store (docs/images.md). orchard-admin image
-- import writes the tree under $ORCHARD_IMAGE_DIR/<name>/ and this row in
-- one step; the api reads it to refuse a sandbox of an image that was never
-- imported (422 with the import command), instead of a row that fails later.
CREATE TABLE images (
    name        text PRIMARY KEY
                CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' AND name <> 'host'),
    source      text NOT NULL,          -- "dir /abs/path", "tar FILE", "oci LAYOUT:TAG"
    size_bytes  bigint NOT NULL CHECK (size_bytes >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
