// mha-opt: mlir-opt with the mha dialect and mhagen's passes, for lit tests
// and for looking at each lowering stage.
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mhagen::mha::registerMhaPassesAndPipeline();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mhagen::mha::MhaDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mhagen's MLIR optimizer\n", registry));
}
