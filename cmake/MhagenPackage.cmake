# Installation rules come with the runtime and CLI issue.
