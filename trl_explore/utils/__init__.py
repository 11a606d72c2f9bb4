"""Small helpers with no knowledge of training: ``lazy`` (lazy public names), ``registry`` (registries of named
choices), ``similarity`` (cosine similarity matrices)."""
