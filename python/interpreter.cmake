# Which Python the module is built for, and pybind11 (included by the top-level CMakeLists.txt).
#
# The rule: -DAQPIM_PYTHON=/path/to/python when given (the pip build passes its own interpreter);
# else the first of `python3` on PATH and /usr/bin/python3 that imports numpy. On Debian 12 both
# are /usr/bin/python3, which has Debian's python3-numpy and python3-torch; on a machine whose PATH
# python3 (pyenv, conda) has no numpy, Debian's interpreter is taken. Sets AQPIM_PYTHON_EXECUTABLE
# (empty when none qualifies), Python_* (FindPython) and pybind11_FOUND.

set(AQPIM_PYTHON "" CACHE FILEPATH
    "Python interpreter the aqpim module is built for (empty: python3 on PATH, then /usr/bin/python3, the first that imports numpy)")

# sys.executable of a candidate when it imports numpy: a pyenv shim resolves to the real interpreter.
function(aqpim_python_with_numpy candidate out)
  set(${out} "" PARENT_SCOPE)
  execute_process(COMMAND ${candidate} -c "import sys, numpy; print(sys.executable)"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE exe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND exe)
    set(${out} ${exe} PARENT_SCOPE)
  endif()
endfunction()

set(AQPIM_PYTHON_EXECUTABLE "")
if(AQPIM_PYTHON)
  set(AQPIM_PYTHON_EXECUTABLE ${AQPIM_PYTHON})
  aqpim_python_with_numpy(${AQPIM_PYTHON} _aqpim_has_numpy)
  if(NOT _aqpim_has_numpy)
    message(STATUS "aqpim: AQPIM_PYTHON=${AQPIM_PYTHON} cannot import numpy: the module builds, but needs numpy to run")
  endif()
else()
  find_program(_aqpim_path_python3 python3 NO_CACHE)
  foreach(candidate ${_aqpim_path_python3} /usr/bin/python3)
    if(EXISTS ${candidate})
      aqpim_python_with_numpy(${candidate} AQPIM_PYTHON_EXECUTABLE)
      if(AQPIM_PYTHON_EXECUTABLE)
        break()
      endif()
    endif()
  endforeach()
endif()

set(pybind11_FOUND FALSE)
if(AQPIM_PYTHON_EXECUTABLE)
  # Another interpreter than at the last configure: forget what FindPython cached for the old one
  # (its headers, its library), so the module is built against the new one's.
  if(DEFINED AQPIM_PYTHON_CONFIGURED AND NOT AQPIM_PYTHON_CONFIGURED STREQUAL AQPIM_PYTHON_EXECUTABLE)
    get_cmake_property(cached CACHE_VARIABLES)
    foreach(v ${cached})
      if(v MATCHES "^_?Python_" OR v MATCHES "^PYBIND11_PYTHON")
        unset(${v} CACHE)
      endif()
    endforeach()
  endif()
  set(AQPIM_PYTHON_CONFIGURED ${AQPIM_PYTHON_EXECUTABLE} CACHE INTERNAL "interpreter of the last configure")
  set(Python_EXECUTABLE ${AQPIM_PYTHON_EXECUTABLE})
  find_package(Python 3.8 QUIET COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
  if(NOT pybind11_FOUND)
    message(STATUS "aqpim: Python module OFF (${AQPIM_PYTHON_EXECUTABLE}: pybind11 or the Python headers not found; Debian: python3-pybind11 python3-dev)")
  endif()
else()
  message(STATUS "aqpim: Python module OFF (no python3 on PATH nor /usr/bin/python3 imports numpy; Debian: python3-numpy, or -DAQPIM_PYTHON=...)")
endif()
