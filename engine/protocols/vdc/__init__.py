"""VDC (AuroraCap's Video Detailed Captions, VDCscore): answer each of a video's questions from its caption, then
grade the answer against the reference (yes/no and a 0-5 score), per caption kind (short, detailed, background,
main_object, camera)."""

from capeval.engine.protocols.base import JudgeProtocol as _JudgeProtocol


class VDCProtocol(_JudgeProtocol):
    name = "vdc"
    version = "1"


PROTOCOL = VDCProtocol()
