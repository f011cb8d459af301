"""One folder per platform, ``targets/<name>/``: what trainspec knows of it on the compiler side
(docs/architecture.md, "A target is a folder"). Targets never import each other, nor anything
above them: the registry (``trainspec/registry/``) lists them and loads each by name."""
