"""pgdrain's version: what ``pgdrain --version`` says, and the package's own (pyproject.toml
reads it from here)."""

VERSION = "0.2.0"
