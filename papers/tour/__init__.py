"""`fedjax-appeal reproduce tour`: one paired-seed comparison per paper family, short."""
