"""The type stubs describe the module as built: every class, method and function in one
is in the other (a stub that drifts misleads every editor and type checker)."""

import ast
from pathlib import Path

import tessera
from tessera import _native

STUB = Path(tessera.__file__).with_name("_native.pyi")


def stubbed():
    tree = ast.parse(STUB.read_text())
    classes, functions = {}, set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")
            }
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    return classes, functions


def test_every_public_name_is_stubbed_and_every_stub_exists():
    classes, functions = stubbed()
    public = {n for n in dir(_native) if not n.startswith("_") and n[0].isupper() and isinstance(getattr(_native, n), type)}
    assert public == set(classes)
    module_functions = {n for n in dir(_native) if not n.startswith("_") and callable(getattr(_native, n)) and n not in public}
    assert module_functions == functions
    for name, methods in classes.items():
        built = {m for m in vars(getattr(_native, name)) if not m.startswith("_")}
        if issubclass(getattr(_native, name), BaseException):
            continue  # exceptions carry attributes set when raised
        assert built == methods, name


def test_the_package_is_typed():
    assert STUB.with_name("py.typed").exists()
