"""Passes from HIR to HIR, one per module, each ``(hir, ctx) -> hir``; the order they run in is
``systolix.compiler.passes.PASSES``."""
