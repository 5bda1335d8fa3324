# The emulator's stand-in for CANN's Ascend C build rules, for building CANN's
# sample programs unchanged (tests/samples/run.sh). A device kernel cannot run
# here, so each kernel source a sample names is replaced by the host stand-in
# of the same base name in tests/samples/kernels/ (ASCEND_IPC_KERNELS_DIR):
#
#   ascendc_library(name STATIC|SHARED src...)  a library of the stand-ins: the
#       host launchers the sample's headers declare (EasyOP, WriteDo, ...)
#   ascendc_fatbin_library(name src...)         a "device binary" for
#       aclrtBinaryLoadFromFile: a shared object of stand-in kernels, at
#       ${CMAKE_INSTALL_PREFIX}/fatbin/<name>/<name>.o, where CANN puts it

get_filename_component(_aipc_cann_root "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT DEFINED ENV{ASCEND_IPC_KERNELS_DIR})
  message(FATAL_ERROR "ascendc.cmake (ascend_ipc): ASCEND_IPC_KERNELS_DIR is not set; run the samples through tests/samples/run.sh")
endif()
set(_aipc_kernels_dir "$ENV{ASCEND_IPC_KERNELS_DIR}")
enable_language(CXX)

# The stand-in for each kernel source, or a stop that names the missing one.
function(_aipc_standins out)
  set(files)
  foreach(src ${ARGN})
    get_filename_component(base "${src}" NAME_WE)
    set(standin "${_aipc_kernels_dir}/${base}.cpp")
    if(NOT EXISTS "${standin}")
      message(FATAL_ERROR "ascendc.cmake (ascend_ipc): no host stand-in for kernel source ${src} (expected ${standin})")
    endif()
    list(APPEND files "${standin}")
  endforeach()
  set(${out} ${files} PARENT_SCOPE)
endfunction()

function(_aipc_standin_target name)
  target_include_directories(${name} PUBLIC "${_aipc_cann_root}/include" "${_aipc_kernels_dir}")
  target_compile_options(${name} PRIVATE -std=c++17 -O2 -Wall -Werror)
  target_link_libraries(${name} PUBLIC "${_aipc_cann_root}/lib64/libascendcl.so" pthread)
endfunction()

function(ascendc_library name type)
  _aipc_standins(files ${ARGN})
  add_library(${name} ${type} ${files})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  _aipc_standin_target(${name})
endfunction()

function(ascendc_fatbin_library name)
  _aipc_standins(files ${ARGN})
  add_library(${name} SHARED ${files})
  set(dir "${CMAKE_INSTALL_PREFIX}/fatbin/${name}")
  set_target_properties(${name} PROPERTIES PREFIX "" SUFFIX ".o" OUTPUT_NAME "${name}"
                        LIBRARY_OUTPUT_DIRECTORY "${dir}")
  _aipc_standin_target(${name})
  # Built where the sample loads it; installed there too for run scripts that install.
  install(TARGETS ${name} LIBRARY DESTINATION "fatbin/${name}")
endfunction()
