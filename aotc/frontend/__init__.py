from .onnx_import import import_model, load_onnx  # noqa: F401
