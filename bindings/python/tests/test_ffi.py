"""The binding's tables agree with the C library's: prototypes and error codes."""
import ctypes
import importlib.util
import pathlib

import socketkit
from socketkit import _ffi, errors

REPOSITORY = pathlib.Path(__file__).resolve().parents[3]
HEADER = REPOSITORY / "include" / "socketkit.h"


def _load_abi_checker():
    spec = importlib.util.spec_from_file_location("check_abi", REPOSITORY / "bindings" / "c" / "tests" / "check_abi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _class_of(ctype):
    if ctype is None:
        return "void"
    if ctype in (ctypes.c_char_p, ctypes.c_void_p) or hasattr(ctype, "_type_") and isinstance(ctype._type_, type) \
            or getattr(ctype, "__name__", "").startswith(("LP_", "CFunctionType")):
        return "pointer"
    if issubclass(ctype, ctypes._CFuncPtr):
        return "pointer"
    size = ctypes.sizeof(ctype)
    if ctype is ctypes.c_double:
        return "double"
    return {2: "int16", 4: "int32", 8: "int64"}[size]


def test_every_header_function_is_declared_with_matching_types():
    checker = _load_abi_checker()
    declared = checker.declarations(HEADER.read_text())
    assert set(declared) == set(_ffi.PROTOTYPES), set(declared) ^ set(_ffi.PROTOTYPES)
    for name, (result, parameters) in declared.items():
        expected = [checker.abi_class(result)] + [checker.abi_class(parameter) for parameter in parameters]
        restype, argtypes = _ffi.PROTOTYPES[name]
        actual = [_class_of(restype)] + [_class_of(argtype) for argtype in argtypes]
        assert actual == expected, f"{name}: binding {actual}, header {expected}"


def test_struct_layouts_match_the_header():
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert ctypes.sizeof(_ffi.SocketDelegate) == 14 * pointer
    assert ctypes.sizeof(_ffi.CError) == 8 + _ffi.ERROR_MESSAGE_CAPACITY
    assert ctypes.sizeof(_ffi.SocketDescriptors) == 16
    # sk_event_t (the C suite checks the same numbers against the header)
    assert ctypes.sizeof(_ffi.Event) == _ffi.EVENT_FORMAT.size == 88
    assert (_ffi.Event.kind.offset, _ffi.Event.tag.offset, _ffi.Event.token.offset) == (16, 24, 80)


def test_error_tables_agree_with_the_library():
    names = {
        errors.BAD_CONFIG: "SK_ERR_BAD_CONFIG", errors.BAD_PARAM: "SK_ERR_BAD_PARAM",
        errors.CONNECT_TIMEOUT: "SK_ERR_CONNECT_TIMEOUT", errors.READ_TIMEOUT: "SK_ERR_READ_TIMEOUT",
        errors.WRITE_TIMEOUT: "SK_ERR_WRITE_TIMEOUT", errors.READ_MAXED_OUT: "SK_ERR_READ_MAXED_OUT",
        errors.CLOSED: "SK_ERR_CLOSED", errors.OTHER: "SK_ERR_OTHER", errors.SYSTEM: "SK_ERR_SYSTEM",
        errors.RESOLUTION: "SK_ERR_RESOLUTION", errors.INVALID_HANDLE: "SK_ERR_INVALID_HANDLE",
    }
    assert set(names) == set(errors.CLASSES)
    for code, name in names.items():
        assert _ffi.lib.sk_error_name(code).decode() == name
        exception = errors.error_from_code(code, 0, "message")
        assert isinstance(exception, socketkit.Error) and exception.code == code
    assert _ffi.lib.sk_error_name(-12).decode() == "SK_ERR_UNKNOWN", "a C code the binding does not know"


def test_versions():
    assert socketkit.LIBRARY_VERSION == "0.1.0"
    assert _ffi.lib.sk_version_number() == _ffi.EXPECTED_VERSION_NUMBER
