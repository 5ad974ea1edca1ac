"""flownb's test suite: a package, so pytest imports each test module, conftest.py and the
helper modules under one name (``tests.…``) that the modules importing each other use too; as a
folder of loose modules, a module another one imported (``tests.test_tracing``, ``serving``)
was executed a second time under its bare name."""
