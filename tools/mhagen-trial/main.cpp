// mhagen-trial REQUEST.json RESULT.json: runs one tuning trial (Trial.h)
// and writes its result. The tuner starts it as a child so that a schedule
// that crashes, hangs or exhausts memory costs one trial, not the search.
// Exit 0 when RESULT.json was written (whatever the trial found), 2 when
// the request is not a valid mhagen.trial_request/1 document.
#include "mhagen/eval/Trial.h"
#include "mhagen/support/Process.h"

#include <iostream>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: mhagen-trial REQUEST.json RESULT.json\n";
    return 2;
  }
  mhagen::TrialRequest request;
  try {
    request = mhagen::TrialRequest::fromJson(mhagen::readFile(argv[1]));
  } catch (const std::exception &e) {
    std::cerr << "mhagen-trial: " << argv[1] << ": " << e.what() << "\n";
    return 2;
  }
  const mhagen::TrialResult result = mhagen::evaluateTrial(request);
  try {
    mhagen::writeFileAtomic(argv[2], result.toJson());
  } catch (const std::exception &e) {
    std::cerr << "mhagen-trial: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
