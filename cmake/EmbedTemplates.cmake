# cmake -DOUT=file.cpp -DINPUTS="a.in|b.in" -P EmbedTemplates.cmake
# Writes a C++ file defining mhagen::embeddedTemplate(name) over the inputs.
set(_body "// Generated from templates/*.in by cmake/EmbedTemplates.cmake.\n")
string(APPEND _body "#include <cstring>\n#include <string>\n\nnamespace mhagen {\n")
string(APPEND _body "const char *embeddedTemplate(const std::string &name) {\n")
string(REPLACE "|" ";" INPUTS "${INPUTS}")
foreach(_in IN LISTS INPUTS)
  get_filename_component(_name "${_in}" NAME)
  file(READ "${_in}" _text)
  string(APPEND _body "  if (name == \"${_name}\")\n    return R\"MHAGEN_TPL(${_text})MHAGEN_TPL\";\n")
endforeach()
string(APPEND _body "  return nullptr;\n}\n} // namespace mhagen\n")
file(WRITE "${OUT}.tmp" "${_body}")
file(RENAME "${OUT}.tmp" "${OUT}")
