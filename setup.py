"""Build of the optional C extensions (the record-batch codec, the tail cache's
garbage-collector helper); all other project metadata is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and the codec runs in pure
Python (kraft_spark/log/codec.py logs that once). tests/log/test_fastcodec.py fails if the
extension is missing, so CI proves it compiled.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kraft_spark.log._fastcodec",
            sources=["kraft_spark/log/_fastcodec.c"],
            optional=True,
        ),
        Extension(
            "kraft_spark.log._gc_untrack",
            sources=["kraft_spark/log/_gc_untrack.c"],
            optional=True,
        ),
    ]
)
