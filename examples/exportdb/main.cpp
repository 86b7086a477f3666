// Runs one case of the ExportDB gallery: `exportdb <case>`; `exportdb` alone lists them.
#include "case.hpp"

int main(int argc, char** argv) {
  auto& cases = exportdb::registry();
  if (argc < 2) {
    for (const auto& [name, e] : cases) std::cout << name << " [" << e.support << "] " << e.description << "\n";
    return 0;
  }
  const auto it = cases.find(argv[1]);
  if (it == cases.end()) {
    std::cerr << "no case " << argv[1] << "\n";
    return 2;
  }
  std::cout << "# " << it->first << " [" << it->second.support << "]: " << it->second.description << "\n\n";
  it->second.run(std::cout);
  return 0;
}
