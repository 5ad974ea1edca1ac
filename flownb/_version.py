"""flownb's version, on the ground floor: what the server reports without importing the
package root (and with it every feature). pyproject.toml holds the same number."""

__version__ = "0.1.0"
