# Lab selection: for each lab named in SCALELAB_LABS, the student's copy of a reference source
# (labs/NN-name/<path under reference/>, written by tools/labgen.py) is compiled in its place.
# Everything else comes from reference/, so lab N never needs the student's lab N-1.

set(SCALELAB_ALL_LABS "")
file(GLOB _lab_dirs LIST_DIRECTORIES true ${CMAKE_CURRENT_SOURCE_DIR}/labs/[0-9][0-9]-*)
foreach(_dir IN LISTS _lab_dirs)
  if(IS_DIRECTORY ${_dir})
    get_filename_component(_name ${_dir} NAME)
    string(SUBSTRING ${_name} 0 2 _num)
    list(APPEND SCALELAB_ALL_LABS ${_num})
    set(SCALELAB_LAB_DIR_${_num} ${_dir})
  endif()
endforeach()

if(SCALELAB_LABS STREQUAL "none" OR SCALELAB_LABS STREQUAL "")
  set(SCALELAB_SELECTED_LABS "")
elseif(SCALELAB_LABS STREQUAL "all")
  set(SCALELAB_SELECTED_LABS ${SCALELAB_ALL_LABS})
else()
  string(REPLACE "," ";" SCALELAB_SELECTED_LABS "${SCALELAB_LABS}")
  foreach(_num IN LISTS SCALELAB_SELECTED_LABS)
    if(NOT DEFINED SCALELAB_LAB_DIR_${_num})
      message(FATAL_ERROR "SCALELAB_LABS names lab '${_num}', which does not exist. "
                          "Known labs: ${SCALELAB_ALL_LABS}. Use none, all, or a list such as 00;01.")
    endif()
  endforeach()
endif()

# scalelab_lab_sources(<out> <reference sources...>): the list with student copies swapped in.
function(scalelab_lab_sources out)
  set(result "")
  foreach(src IN LISTS ARGN)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/reference ${src})
    set(chosen ${src})
    foreach(num IN LISTS SCALELAB_SELECTED_LABS)
      if(EXISTS ${SCALELAB_LAB_DIR_${num}}/${rel})
        set(chosen ${SCALELAB_LAB_DIR_${num}}/${rel})
      endif()
    endforeach()
    list(APPEND result ${chosen})
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()
