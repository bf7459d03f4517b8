"""Judge-reply helpers shared by the protocols and the judging loop: fencing untrusted text, repairing replies."""
