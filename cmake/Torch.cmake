# The torch.distributed backend (python/csrc/torch_backend): a Python module
# built against the torch of MESHTRAIN_TORCH_PYTHON (default: the
# MESHTRAIN_PYTHON environment variable scripts/test.sh exports, the virtual
# environment of scripts/python-env.sh). Without a Python whose torch loads
# it is left out with the reason, and its tests skip saying so.
# A wheel built by pip (pyproject.toml, scikit-build-core) uses the Python
# that builds it: with --no-build-isolation, the environment's torch.
set(mt_torch_python_default "$ENV{MESHTRAIN_PYTHON}")
if(NOT mt_torch_python_default AND SKBUILD AND Python_EXECUTABLE)
  set(mt_torch_python_default ${Python_EXECUTABLE})
endif()
set(MESHTRAIN_TORCH_PYTHON "${mt_torch_python_default}" CACHE FILEPATH
    "Python whose torch the torch.distributed backend is built against")
set(MESHTRAIN_TORCH_BACKEND OFF)
if(MESHTRAIN_TORCH_PYTHON AND NOT MESHTRAIN_TSAN AND NOT MESHTRAIN_FUZZ AND NOT CMAKE_CROSSCOMPILING)
  execute_process(
    COMMAND ${MESHTRAIN_TORCH_PYTHON} -c
      "import sysconfig, torch, torch.utils.cpp_extension as c; print('|'.join(c.include_paths())); print('|'.join(c.library_paths())); print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX')); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
    OUTPUT_VARIABLE torch_query ERROR_VARIABLE torch_error RESULT_VARIABLE torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(torch_rc EQUAL 0)
    # One field a line; the path lists inside a field are '|'-separated.
    string(REGEX MATCHALL "[^\n]+" torch_fields "${torch_query}")
    list(GET torch_fields 0 MESHTRAIN_TORCH_INCLUDES)
    list(GET torch_fields 1 MESHTRAIN_TORCH_LIBDIR)
    list(GET torch_fields 2 MESHTRAIN_TORCH_PY_INCLUDE)
    list(GET torch_fields 3 MESHTRAIN_TORCH_EXT_SUFFIX)
    list(GET torch_fields 4 MESHTRAIN_TORCH_CXX11_ABI)
    list(GET torch_fields 5 MESHTRAIN_TORCH_VERSION)
    string(REPLACE "|" ";" MESHTRAIN_TORCH_INCLUDES "${MESHTRAIN_TORCH_INCLUDES}")
    set(MESHTRAIN_TORCH_BACKEND ON)
    message(STATUS "torch.distributed backend: ON (torch ${MESHTRAIN_TORCH_VERSION} of ${MESHTRAIN_TORCH_PYTHON})")
  else()
    message(STATUS "torch.distributed backend: OFF (${MESHTRAIN_TORCH_PYTHON} cannot import torch)")
  endif()
else()
  message(STATUS "torch.distributed backend: OFF (no MESHTRAIN_TORCH_PYTHON / MESHTRAIN_PYTHON)")
endif()
