"""Test helpers shared across suites (real services the tests create and tear down)."""
