"""One module per ONNX op or small family; each registers its handler when imported, and every
module here is imported (a new op is a new module, nothing else to edit)."""

import importlib
import pkgutil

for _module in sorted(info.name for info in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
