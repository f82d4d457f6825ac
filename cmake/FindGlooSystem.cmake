# Finds the system Gloo (Debian libgloo-dev) and defines the imported target
# Gloo::gloo. Debian's package ships headers and libgloo.so but no CMake
# config. RedisStore needs hiredis (libhiredis-dev), whose header wants
# /usr/include/hiredis on the include path.
if(TARGET Gloo::gloo)
  return()
endif()
find_path(GLOO_INCLUDE_DIR gloo/context.h REQUIRED)
find_library(GLOO_LIBRARY NAMES gloo REQUIRED)
find_path(HIREDIS_INCLUDE_DIR hiredis.h PATH_SUFFIXES hiredis)
find_library(HIREDIS_LIBRARY NAMES hiredis)
add_library(Gloo::gloo UNKNOWN IMPORTED)
set_target_properties(Gloo::gloo PROPERTIES
  IMPORTED_LOCATION "${GLOO_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${GLOO_INCLUDE_DIR}")
if(HIREDIS_INCLUDE_DIR AND HIREDIS_LIBRARY)
  set_property(TARGET Gloo::gloo APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${HIREDIS_INCLUDE_DIR}")
  set_property(TARGET Gloo::gloo APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${HIREDIS_LIBRARY}")
  set_property(TARGET Gloo::gloo APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS ZEN_HAVE_REDIS=1)
endif()
